"""Source rules: one module per rule family, named as in the trace half (``sync`` TL1xx, ``input`` TL2xx, ``memory``
TL3xx); every SourceRule subclass here is discovered (engine.discover)."""
