"""One description of a DL job shared by every part of unstall.

``zoo`` holds real ``torch.nn`` models and their static facts (tensors, bytes, FLOPs, layers);
the iteration-time model and the measured job profiles build on it.
"""
