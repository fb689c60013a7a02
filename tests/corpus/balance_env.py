"""A small balancing task shared by the RL programs of the corpus, in place of a gym
environment: the state drifts, the action pushes it back, reward 1 per step until it
leaves [-1, 1] or 100 steps pass."""
import numpy as np


class Balance:
    def __init__(self):
        self.rng = np.random.default_rng(1)

    def reset(self):
        self.t, self.s = 0, self.rng.uniform(-0.05, 0.05, size=4)
        return self.s.astype(np.float32)

    def step(self, action):
        push = 0.02 if action == 1 else -0.02
        self.s = self.s + np.array([self.s[1], 0.05 * self.s[0] + push, self.s[3], 0.01 * self.s[2]]) * 0.5
        self.s += self.rng.normal(0, 0.005, size=4)
        self.t += 1
        done = abs(self.s[0]) > 1 or abs(self.s[2]) > 1 or self.t >= 100
        return self.s.astype(np.float32), 1.0, done
