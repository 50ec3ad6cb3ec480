"""Shipped profiles (package data)."""
