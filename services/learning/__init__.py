"""The learning loop (issue 40): user feedback on results, and later the training that uses it."""
