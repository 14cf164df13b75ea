"""HTTP/REST front-end (KServe v2 + Triton extensions) on a bare asyncio protocol."""
