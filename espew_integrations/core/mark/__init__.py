"""The mark: which texts a key marks and how a clean row becomes a marked one."""
