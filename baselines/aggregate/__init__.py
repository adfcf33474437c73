"""The aggregated exact model for chains of identical layers (solver ``aggregate``,
docs/formulations.md §11): CP-SAT over layer counts per stage instead of one variable per layer."""
