"""The instance side of the data plane: the instance agent (``python -m workers.instance``) that
claims a slot of the current plan version and runs a worker per share of it, on GPU and CPU
hardware classes alike, emulated where the hardware or the model is not there."""
