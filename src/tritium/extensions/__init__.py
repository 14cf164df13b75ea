"""What the server does around a request besides scheduling it, one module per Triton
extension or feature: reserved request parameters (``parameters.py``), a raw binary request's
one input (``raw_input.py``), classification (``classification.py``), system shared memory
(``shm.py``) and the response cache (``cache.py``). ``InferenceServer`` applies them."""
