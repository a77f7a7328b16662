"""A seeded compound-system simulator with a known optimum (issues 27, 44): K components (2-50) in a
chain, tree or stack of diamonds; prompt, choice and per-input routing components with 2 to 128 values
that write short text; components separable in their best values (interaction=none) or interacting
with their parents' values and the input type (interaction=on); no LM, so thousands of system runs a
second. `spec.py` draws an instance, `components.py` runs it, `exact.py` computes any configuration's
expected score, the optimum (closed form, or exact elimination under interaction) and the perfect local
reward `lrf=oracle` scores with, `system.py` builds the Pipeline (`pipeline=synthetic`).
"""
