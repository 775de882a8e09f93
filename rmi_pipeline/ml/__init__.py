"""Model code with no orchestration in it: the transformer, decoding and the training loop."""
