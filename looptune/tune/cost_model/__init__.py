"""Cost models: learn from measured candidates to rank new ones (xgb, mlp, random), and the
Kendall tau that says how well they rank."""
from .base import CostModel, aggregate, normalized_labels, records_as_candidates
from .metric import kendall_tau
from .mlp import MLPModel
from .random_model import RandomModel
from .xgb import XGBModel

__all__ = ["CostModel", "MLPModel", "RandomModel", "XGBModel", "aggregate", "kendall_tau",
           "normalized_labels", "records_as_candidates"]
