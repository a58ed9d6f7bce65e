"""Offline training of the embedded target model: corpus, tokenizer and trainer."""
