"""The three worked toys of Chapter 5: a per-instance choice feeding a fixed downstream scorer.

Each toy reproduces the chapter's per-query global rewards exactly. Its naive local metric
(keyword overlap, a leaderboard, brevity) is the default routing policy, so the unoptimized system
reproduces the chapter's misaligned score; an aligned LRF, trained from preference pairs, must
recover the aligned score on its own.
"""
