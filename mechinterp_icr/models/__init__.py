"""Model construction (the only place touching TransformerLens construction) and constructions."""
