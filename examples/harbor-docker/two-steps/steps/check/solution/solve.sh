#!/usr/bin/env bash
echo second >> /work/notes.txt
