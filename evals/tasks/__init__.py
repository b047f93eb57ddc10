"""lm-eval task configs that run lm-eval's own tasks on the local data layout (evals/data_layout.py).

Each YAML includes lm-eval's task YAML through `../lm_eval_tasks/`, a link that evals/task_suite.py
places beside a copy of this folder at run time, and overrides only where the documents come from.
"""
