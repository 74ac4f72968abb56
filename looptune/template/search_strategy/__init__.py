"""The classic tuners as search strategies of the tuning engine, over a template's design
space (template.space_generator.TemplateSpace): registered as "template-gridsearch",
"template-random", "template-ga", "template-sa", "template-hill-climb" and "template-xgb"."""
from .base import TemplateSearch
from .ga import GeneticSearch
from .grid_search import GridSearch
from .hill_climb import HillClimb
from .random_search import RandomSearch
from .sa import SimulatedAnnealing
from .xgb import XGBSearch

__all__ = ["GeneticSearch", "GridSearch", "HillClimb", "RandomSearch", "SimulatedAnnealing",
           "TemplateSearch", "XGBSearch"]
