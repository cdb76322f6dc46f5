"""The runtime: ``Tensor``, realization, the program cache and executor choice (layer 2)."""
