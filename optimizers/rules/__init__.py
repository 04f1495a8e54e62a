"""Optimizer rules written on the template, one module each."""

from optimizers.rules.adabelief import AdaBelief
from optimizers.rules.adafactor import Adafactor
from optimizers.rules.adam import Adam
from optimizers.rules.adamw import AdamW
from optimizers.rules.adan import Adan
from optimizers.rules.ademamix import AdEMAMix
from optimizers.rules.cocob import COCOB
from optimizers.rules.conditional_gradient import ConditionalGradient
from optimizers.rules.lamb import LAMB
from optimizers.rules.lazy_adam import LazyAdam
from optimizers.rules.lion import Lion
from optimizers.rules.muon import Muon
from optimizers.rules.novograd import NovoGrad
from optimizers.rules.proximal_adagrad import ProximalAdagrad
from optimizers.rules.rectified_adam import RectifiedAdam
from optimizers.rules.schedule_free import ScheduleFreeAdamW, ScheduleFreeSGD
from optimizers.rules.sgd import SGD
from optimizers.rules.sgdw import SGDW
from optimizers.rules.yogi import Yogi

__all__ = ["COCOB", "LAMB", "SGD", "SGDW", "AdaBelief", "Adafactor", "Adam", "AdamW", "Adan", "AdEMAMix",
           "ConditionalGradient", "LazyAdam", "Lion", "Muon", "NovoGrad", "ProximalAdagrad", "RectifiedAdam",
           "ScheduleFreeAdamW", "ScheduleFreeSGD", "Yogi"]
