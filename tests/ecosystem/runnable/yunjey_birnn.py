"""yunjey/pytorch-tutorial: a bidirectional LSTM over the rows of MNIST images (the
stub's); as is."""

REPO = "yunjey/pytorch-tutorial"
PATH = "tutorials/02-intermediate/bidirectional_recurrent_neural_network/main.py"
# This CPU has no float16 LSTM kernel (oneDNN: "could not create a primitive
# descriptor"); amplint declines float16 on the CPU for recurrent layers.
DECLINED = {"fp16": "has no float16 kernel on most CPUs"}
