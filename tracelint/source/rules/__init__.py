"""Source rules: one module per rule family; every SourceRule subclass here is discovered (engine.discover)."""
