"""What a trained model is published with: its model card, the sentence-transformers files, plots,
and the consolidation of DeepSpeed ZeRO checkpoints into plain models."""
