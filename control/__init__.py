"""The control plane: app registration, the planning epoch (observed rates -> plans -> a new plan
version -> fleet size), queue lifecycle and garbage collection. Logic only: AWS calls go through
the adapters in :mod:`core.adapters`, injected by the callers (the planner Lambda handler, the
local stack, the CLI). Nothing is imported here so that importing a submodule stays cheap."""
