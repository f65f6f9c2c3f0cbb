"""Scripts for lent GPU machines: the dataset collection and device-call wrappers."""
