"""astuner on verl: config translation, the `astuner` agent loop, and the launch of verl's PPO trainer."""
