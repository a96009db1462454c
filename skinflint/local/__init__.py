"""The local stack: moto's server on 127.0.0.1, the resources, the front under uvicorn and one
worker process per planned machine (``skinflint up`` / ``skinflint demo``)."""
