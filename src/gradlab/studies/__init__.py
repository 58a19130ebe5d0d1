"""The source articles' questions, audited: product/quotient rule Functions, planted gradient
defects, and the writer of a study's results."""
