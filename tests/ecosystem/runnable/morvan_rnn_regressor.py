"""MorvanZhou/PyTorch-Tutorial 403: an RNN predicting cos from sin, its hidden
state carried from step to step; as is."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/403_RNN_regressor.py"
DECLINED = {
    # Each step plots `prediction.data.numpy()`, which is bfloat16 under
    # bfloat16 autocast and NumPy cannot hold.
    "bf16": "hands NumPy a tensor the forward pass computes",
    # This CPU has no float16 RNN kernel (oneDNN: "could not create a primitive
    # descriptor"); amplint declines float16 on the CPU for recurrent layers.
    "fp16": "has no float16 kernel on most CPUs",
}
