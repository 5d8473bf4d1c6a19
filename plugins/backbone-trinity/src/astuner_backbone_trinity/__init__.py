"""astuner on Trinity-RFT: config translation, the astuner workflow for Trinity, `trinity run`."""
