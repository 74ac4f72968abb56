"""Tuners over a template's ConfigSpace (AutoTVM's names): grid search, random, a genetic
algorithm, simulated annealing, hill climbing, and XGBoost-guided search."""
from .base import Tuner
from .ga import GATuner
from .grid_search import GridSearchTuner
from .hill_climb import HillClimbTuner
from .random_tuner import RandomTuner
from .sa import SimulatedAnnealingTuner
from .xgb import XGBTuner

__all__ = ["GATuner", "GridSearchTuner", "HillClimbTuner", "RandomTuner",
           "SimulatedAnnealingTuner", "Tuner", "XGBTuner"]
