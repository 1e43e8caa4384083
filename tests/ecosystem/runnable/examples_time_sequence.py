"""pytorch/examples time_sequence_prediction: two LSTM cells fitted by L-BFGS to
sine waves, made in the script in place of generate_sine_wave.py's file."""

REPO = "pytorch/examples"
PATH = "time_sequence_prediction/train.py"
ARGV = ("--steps", "4")  # L-BFGS steps, each up to 20 closure calls
EDITS = (
    # traindata.pt is what generate_sine_wave.py writes (100 waves of 1000
    # points, not run here): 13 waves of 100 points, made the same way.
    (
        "data = torch.load('traindata.pt')",
        "data = np.sin((np.arange(100) + np.random.RandomState(2).randint(-80, 80, (13, 1)))"
        " / 20.0)",
    ),
)
# The optimizer is L-BFGS, stepped with a closure: amplint declines every
# setting and says why.
_FINDING = "refuses closures"
DECLINED = {"default": _FINDING, "bf16": _FINDING, "fp16": _FINDING}
