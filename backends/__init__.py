"""The `TritonPythonModel` adapters, one folder per model (installed as
`readability_triton._backends` so that `readability-triton assemble` finds them)."""
