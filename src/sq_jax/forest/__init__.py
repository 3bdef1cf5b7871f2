"""The eval forest: binarized, CSE-folded trees, input binding and the reference evaluator."""
