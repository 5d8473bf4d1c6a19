"""astuner-judge-math: judges `math_answer` (rule) and `math_answer_llm` (rule, then an auxiliary model)."""
