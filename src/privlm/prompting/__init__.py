"""Private prompt learning (Duan et al., Flocks of Stochastic Parrots): prompted
classification with a causal LM, PromptDPSGD (soft prompt and prefix) and PromptPATE."""
