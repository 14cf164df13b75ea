"""The OpenAI-compatible API on the HTTP listener (docs/openai.md): ``/v1/models``,
``/v1/completions`` and ``/v1/chat/completions`` over any model that takes ``text_input`` and
answers ``text_output``, in the request format its config declares (formats.py)."""
