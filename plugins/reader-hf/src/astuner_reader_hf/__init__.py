"""astuner-reader-hf: the `huggingface_dat_repo` reader and `astuner data download`."""
