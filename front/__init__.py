"""The front API: FastAPI app (``app.py``), its logic (``service.py``) and the Lambda handler."""
