"""What the tests share: the apps and servers they start, the tiny models they build, and helpers."""
