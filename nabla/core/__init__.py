"""Core runtime: dtypes, devices, Tensor/TensorImpl, pytrees, graph evaluation, state."""
