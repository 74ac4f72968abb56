"""Tuners over a template's ConfigSpace (AutoTVM's names): grid search, random, a genetic
algorithm, simulated annealing, hill climbing, and XGBoost-guided search - each the
engine's search strategy of that name ("template-xgb", ...) driven by the task scheduler."""
from .base import (GATuner, GridSearchTuner, HillClimbTuner, RandomTuner,
                   SimulatedAnnealingTuner, Tuner, XGBTuner)

__all__ = ["GATuner", "GridSearchTuner", "HillClimbTuner", "RandomTuner",
           "SimulatedAnnealingTuner", "Tuner", "XGBTuner"]
