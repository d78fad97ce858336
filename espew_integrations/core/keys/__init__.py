"""The key: options, generation, audit sample, storage, rings, where it is read from."""
