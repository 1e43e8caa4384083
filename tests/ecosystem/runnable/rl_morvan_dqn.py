"""MorvanZhou/PyTorch-Tutorial 405: DQN on CartPole-v0 (the gym stub's, with
gym 0.8's API); as is: it learns once 2,000 transitions are stored."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/405_DQN_Reinforcement_learning.py"
STEPS = 20
