"""Logging finished runs to an experiment tracker (MLflow, W&B): `tracking=mlflow|wandb`.

A Hydra callback (callback.py) reads each finished run folder into one RunRecord (record.py) and hands
it to the chosen tracker (mlflow.py, wandb.py); a sweep gets one parent run that its jobs belong to.
"""
