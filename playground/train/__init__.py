"""Offline training of the drafters: prompt set, self-distillation records, TTT trainer, evaluation, model card."""
