"""What the user asked for: a call's arguments checked, its compiler params, its aliases, and
its body traced into a ``Kernel``."""
