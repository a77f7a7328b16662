"""A seeded compound-system simulator with a known optimum (issue 27): K components (2-50) in a chain,
tree or stack of diamonds; prompt, choice and per-input routing components that write short text;
no LM, so thousands of system runs a second. `spec.py` draws an instance, `components.py` runs it,
`exact.py` computes any configuration's expected score and the optimum in closed form, `system.py`
builds the Pipeline (`pipeline=synthetic`).
"""
