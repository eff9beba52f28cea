"""Tuning studies (issue 17): the study model, its search space, trial scores and the Optuna search."""
