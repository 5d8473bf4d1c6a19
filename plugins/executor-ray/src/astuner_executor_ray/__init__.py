"""astuner-executor-ray: `rollout.executor: ray`, each rollout's workflow as a Ray task."""
