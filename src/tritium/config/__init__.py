"""What a model is, from its configuration: config.pbtxt → Triton's ``ModelConfig``
(``model_config``), normalised and checked into a frozen ``ModelSpec`` (``spec``), and an
ensemble's plan over its composing models (``ensemble``). Pure: no backend, no scheduler."""
