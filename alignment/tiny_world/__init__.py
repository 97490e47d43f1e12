"""The tiny world: an arithmetic task, its tokenizer and a tiny Llama, shipped for the demo and tests."""
