"""MorvanZhou/PyTorch-Tutorial 402: an LSTM over image rows on MNIST (the
stub's), one epoch; as is."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/402_RNN_classifier.py"
# This CPU has no float16 LSTM kernel (oneDNN: "could not create a primitive
# descriptor"); amplint declines float16 on the CPU for recurrent layers.
DECLINED = {"fp16": "has no float16 kernel on most CPUs"}
