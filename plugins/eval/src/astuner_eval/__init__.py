"""astuner-eval: `astuner eval`, scores of a model or a training checkpoint on one split.

`astuner eval --conf X [--checkpoint DIR|latest] [-k N]` runs the config's
workflow and judge on every task of a split through the same rollout stack
as a run (`evaluation`), on the config's model or a checkpoint folder in its
place (`checkpoints`: a LoRA adapter is merged into its base once), and
prints mean reward, success rate and pass@k.

Nothing is imported here: the plugin's entry point (`plugin`) loads with
every `astuner` command, and the rollout stack only when an evaluation runs.
"""
