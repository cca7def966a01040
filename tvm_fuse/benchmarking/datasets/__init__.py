"""Real datasets read from where a system package installs them (nothing is downloaded):
`fashion_mnist`, for measuring int8 accuracy on trained models."""
