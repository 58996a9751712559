"""The emulator's notifications: the deployer's subscriptions made into rules, topics and API destinations
(:mod:`~spotrun.local.notifications.subscriptions`), and their delivery as AWS delivers it, which moto does not:
API destinations and SNS topics as rule targets (:mod:`~spotrun.local.notifications.targets`), SNS e-mail as
files in an outbox (:mod:`~spotrun.local.notifications.sns_email`).
"""
