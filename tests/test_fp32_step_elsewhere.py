"""AMP001 on steps whose parts are not in one loop or function body: a loss
built from what another function saved, a step split across two helpers, loss
scaling written by hand.  Each is reported with where autocast would go, and
left as it is; the look-alikes that are not training stay silent."""

from __future__ import annotations

from tests.helpers import amp001_messages, assert_declined, dedent, findings_of, fixed


def test_a_step_at_the_top_level_runs_once_and_is_no_training_step() -> None:
    """A tutorial's one step of gradient descent, a notebook cell: nothing
    repeats for mixed precision to speed up, and a GradScaler could skip that
    only step while it calibrates its scale.  Not reported, not rewritten."""
    source = dedent("""
        import torch
        import torch.nn as nn

        linear = nn.Linear(3, 2).cuda()
        optimizer = torch.optim.SGD(linear.parameters(), lr=0.01)
        optimizer.zero_grad()
        loss = nn.MSELoss()(linear(x), y)
        loss.backward()
        optimizer.step()
        """)
    assert amp001_messages(source) == []
    assert fixed(source) == source
    looped = source.replace(
        "optimizer.zero_grad()", "for x, y in loader:\n    optimizer.zero_grad()"
    )
    looped = looped.replace("\nloss", "\n    loss").replace(
        "\noptimizer.step", "\n    optimizer.step"
    )
    (message,) = amp001_messages(looped)
    assert "not rewritten" not in message


REINFORCE = dedent("""
    import torch
    from torch.distributions import Categorical


    class Policy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.affine = torch.nn.Linear(4, 2)
            self.saved_log_probs = []
            self.rewards = []

        def forward(self, x):
            return torch.softmax(self.affine(x), dim=1)


    policy = Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)


    def select_action(state):
        probs = policy(state)
        m = Categorical(probs)
        action = m.sample()
        policy.saved_log_probs.append(m.log_prob(action))
        return action.item()


    def finish_episode():
        returns = torch.tensor(policy.rewards[::-1])
        losses = []
        for log_prob, R in zip(policy.saved_log_probs, returns):
            losses.append(-log_prob * R)
        optimizer.zero_grad()
        loss = torch.cat(losses).sum()
        loss.backward()
        optimizer.step()


    def main(env):
        for episode in range(100):
            state = env.reset()
            for t in range(1000):
                action = select_action(state)
                state, reward, done = env.step(action)
                policy.rewards.append(reward)
                if done:
                    break
            finish_episode()
    """)


def test_a_loss_built_from_saved_log_probs_names_where_the_forward_pass_is() -> None:
    """`policy.rewards` is filled too, but by `main`, which never calls the
    policy: the forward pass is in `select_action`."""
    assert_declined(
        REINFORCE,
        "its loss is built from `policy.saved_log_probs`, which "
        "`select_action` fills while running the model: the forward pass is there, not "
        "here; run it under torch.autocast in that function and scale this loss with a "
        "GradScaler",
    )


def test_a_method_that_fills_self_from_a_submodule_is_found_too() -> None:
    source = dedent("""
        import torch


        class Agent:
            def __init__(self):
                self.policy = Policy()
                self.optimizer = torch.optim.Adam(self.policy.parameters())
                self.saved_log_probs = {}

            def act(self, key, state):
                dist = self.policy(state)
                action = dist.sample()
                self.saved_log_probs[key].append(dist.log_prob(action))
                return action

            def log(self, key, value):
                self.saved_log_probs[key].append(value)

            def learn(self):
                probs = []
                for key in self.saved_log_probs:
                    probs.extend(self.saved_log_probs[key])
                loss = -torch.stack(probs).sum()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
        """)
    (message,) = amp001_messages(source)
    assert "built from `self.saved_log_probs`, which `act` fills" in message


def test_a_loss_of_bare_parameters_stays_silent() -> None:
    """A temperature's loss (`log_alpha`) or a test's `p.sum()`: no model runs
    for it anywhere, so it is not a step for AMP."""
    source = dedent("""
        import torch


        def test_scheduler():
            p = torch.nn.Parameter(torch.zeros(0))
            opt = torch.optim.SGD([p], lr=5.0)
            p.sum().backward()
            opt.step()


        def tune_alpha(log_alpha, a_optimizer, log_pi, target):
            alpha_loss = (-log_alpha.exp() * (log_pi + target).detach()).mean()
            a_optimizer.zero_grad()
            alpha_loss.backward()
            a_optimizer.step()
        """)
    assert amp001_messages(source) == []


SPLIT = dedent("""
    import torch


    class TrainLoop:
        def __init__(self, model, data):
            self.model = model
            self.data = data
            self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def run_loop(self):
            for batch in self.data:
                self.run_step(batch)

        def run_step(self, batch):
            self.forward_backward(batch)
            self.optimize()

        def forward_backward(self, batch):
            self.opt.zero_grad()
            for micro in batch.split(4):
                loss = self.model(micro.cuda()).pow(2).mean()
                loss.backward()

        def optimize(self):
            self.opt.step()
    """)


def test_a_step_split_across_two_helpers_is_reported_with_both() -> None:
    (finding,) = [d for d in findings_of(SPLIT) if d.code == "AMP001"]
    assert finding.span.line == 15  # `self.forward_backward(batch)`
    assert finding.message.endswith(
        "not rewritten: the backward runs in `self.forward_backward(batch)` and the "
        "optimizer step in `self.optimize()`, helpers this step calls: compute the forward "
        "pass and the loss under torch.autocast and scale the loss in the first, step and "
        "update a GradScaler both can reach in the second"
    )
    assert fixed(SPLIT) == SPLIT


def test_test_functions_called_in_turn_are_no_split_step() -> None:
    """A test script's `main()` calls one case that backpropagates and then one
    that steps: free functions, no object whose step they share."""
    source = dedent("""
        import torch


        def check_backward(model, x):
            model(x).sum().backward()


        def check_step(optimizer):
            optimizer.step()


        def main(model, optimizer, x):
            check_backward(model, x)
            check_step(optimizer)
        """)
    assert amp001_messages(source) == []


HAND_SCALED = dedent("""
    import torch


    class LossScaler:
        def __init__(self, scale=2.0**16):
            self.loss_scale = scale

        def has_overflow(self, params):
            return any(not torch.isfinite(p.grad).all() for p in params)


    def train(model, loader, optimizer):
        loss_scaler = LossScaler()
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y) * loss_scaler.loss_scale
            optimizer.zero_grad()
            loss.backward()
            if not loss_scaler.has_overflow(model.parameters()):
                for p in model.parameters():
                    p.grad.data.mul_(1.0 / loss_scaler.loss_scale)
                optimizer.step()
    """)


def test_loss_scaling_by_hand_in_fp32_is_reported_not_rewritten() -> None:
    assert_declined(
        HAND_SCALED,
        "the loss is scaled by hand (`loss = "
        "torch.nn.functional.mse_loss(model(x), y) * loss_scaler.loss_scale`) but the model "
        "runs in FP32, where a loss scale protects nothing: replace the hand-written scaling "
        "with torch.autocast around the forward pass and a torch.amp.GradScaler",
    )


def test_loss_scaling_by_hand_of_a_half_model_is_mixed_precision_already() -> None:
    """The same scaler beside `model.half()`: a hand-written float16 recipe."""
    source = HAND_SCALED.replace(
        "    loss_scaler = LossScaler()\n", "    model.half()\n    loss_scaler = LossScaler()\n"
    )
    assert "model.half()" in source
    assert amp001_messages(source) == []


LOOPED = dedent("""
    import torch


    class Trainer:
        def optimize(self, loss):
            optimizers = list(self.optimizers.values())
            for optimizer in optimizers:
                optimizer.zero_grad()
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()

        def train_step(self, x):
            self.optimize(self.model(x.cuda()).mean())
    """)


LOOPED_FUNCTION = dedent("""
    import torch


    def train(model, optimizers, loader):
        for x in loader:
            loss = model(x.cuda()).mean()
            for optimizer in optimizers:
                optimizer.zero_grad()
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
    """)


def test_optimizers_stepped_in_a_loop_step_through_the_scaler_in_it() -> None:
    migrated = fixed(LOOPED_FUNCTION)
    assert (
        "        scaler.scale(loss).backward()\n"
        "        for optimizer in optimizers:\n"
        "            scaler.step(optimizer)\n"
        "        scaler.update()\n"
    ) in migrated
    assert amp001_messages(migrated) == []


def test_optimizers_stepped_in_a_loop_over_a_generator_are_declined_with_the_recipe() -> None:
    source = LOOPED_FUNCTION.replace(
        "for optimizer in optimizers:\n            optimizer.step()",
        "for optimizer in iter(optimizers):\n            optimizer.step()",
    )
    assert_declined(
        source,
        "the optimizers are stepped in a loop (`for optimizer in iter(optimizers): "
        "...step()`) over what may not iterate twice, and an unscale_ before a clip needs "
        "a loop of its own: step each through one GradScaler by hand (`scaler.step(opt)` "
        "in the loop, one `scaler.update()` after it, `scaler.unscale_(opt)` for each "
        "before a clip)",
    )


def test_a_loop_stepping_environments_or_a_scaled_loop_is_no_fp32_step() -> None:
    envs = LOOPED.replace(
        "for optimizer in optimizers:\n            optimizer.step()",
        "for env in envs:\n            env.step()",
    )
    assert "env.step()" in envs
    assert amp001_messages(envs) == []
    scaled = LOOPED.replace("loss.backward()", "scaler.scale(loss).backward()").replace(
        "optimizer.step()", "scaler.step(optimizer)"
    )
    assert amp001_messages(scaled) == []


def test_optimizers_stepped_in_loops_on_two_paths_each_update_after_their_loop() -> None:
    """XLM's optimize(): a loop of steps on each of two exclusive paths; the
    path that runs updates after its loop."""
    source = LOOPED_FUNCTION.replace(
        "        for optimizer in optimizers:\n            optimizer.step()\n",
        "        if model.training:\n"
        "            for optimizer in optimizers:\n                optimizer.step()\n"
        "        else:\n"
        "            for optimizer in optimizers:\n                optimizer.step()\n",
    )
    assert "if model.training:" in source
    migrated = fixed(source)
    loop = "for optimizer in optimizers:\n                scaler.step(optimizer)\n"
    assert migrated.count(loop + "            scaler.update()\n") == 2
    assert amp001_messages(migrated) == []


def test_optimizers_stepped_in_two_loops_one_iteration_runs_are_declined() -> None:
    source = LOOPED_FUNCTION.replace(
        "        for optimizer in optimizers:\n            optimizer.step()\n",
        "        for optimizer in optimizers:\n            optimizer.step()\n" * 2,
    )
    assert_declined(
        source,
        "the optimizers are stepped in 2 loops that one iteration runs in turn: step each "
        "through one GradScaler by hand (`scaler.step(opt)` once per optimizer, one "
        "`scaler.update()` after them, `scaler.unscale_(opt)` for each before a clip)",
    )
