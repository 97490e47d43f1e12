"""`import openrlhf` where OpenRLHF is not installed (alignment/openrlhf_names.py): only the names user files
for OpenRLHF import are here."""
