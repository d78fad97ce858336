"""Statistics: the exact rank test, the alignment of a space and word evidence."""
