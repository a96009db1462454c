"""Demo models built from code with fixed seeds, and the CPU tracker."""
